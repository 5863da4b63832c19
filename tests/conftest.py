"""The suite keeps kernel replays (tensorprog.limit.replay_store) in a directory of its own, so
that it neither reads records a user's cache holds nor leaves any behind."""
import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="tensorprog_test_cache_")
os.environ["TENSORPROG_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
