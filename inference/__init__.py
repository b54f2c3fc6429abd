"""What is computed from the store, in four parts: ``read`` (params, scorer, Memory), ``learn`` (fit, calibrate,
train), ``agent`` (context, ask, readers) and ``evaluation`` (world, baselines, bench: out of the product path)."""
