"""Small worker apps the worker tests run as real processes (``python -m stepwise.worker
worker_apps.<module>:worker``, from the tests directory). They talk to the test through
files in ``$WORKER_DIR``."""
