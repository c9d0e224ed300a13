"""verikv's own benchmark suite: the chat-serving trace, micro-benchmarks, hashing rates and the
pool-size scaling run. Run ``python -m benchmarks --help`` from the checkout root; results are
recorded in ``benchmarks/RESULTS.md``."""
