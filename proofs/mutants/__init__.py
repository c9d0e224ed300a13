"""Deliberately broken pools, managers and spec transitions, and the checks that catch each."""
