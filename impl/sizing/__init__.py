"""verikv.sizing: device-buffer sizing (accelerator catalog, kernel layouts, the planner)."""
