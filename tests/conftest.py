"""The test session keeps symform's cache (symform.engine.store.disk_cache) in a directory of its own, not the user's."""

import atexit
import os
import shutil
import tempfile

if "SYMFORM_CACHE_DIR" not in os.environ:
    os.environ["SYMFORM_CACHE_DIR"] = tempfile.mkdtemp(prefix="symform-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SYMFORM_CACHE_DIR"], ignore_errors=True)
