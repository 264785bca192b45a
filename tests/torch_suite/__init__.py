"""PyTorch's own test inputs (``op_db``'s ``nn.functional`` rows, ``module_db``) through
handgrad: the adapters per family, the engine (:mod:`.core`), the runner and the report
(``python tests/torch_suite --write docs/torch_suite.md``)."""
