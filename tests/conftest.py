"""The test session keeps symform's cache (symform.engine.store.disk_cache) in a directory of its own, not the user's."""

import atexit
import os
import shutil
import tempfile

if "SYMFORM_CACHE_DIR" not in os.environ:
    os.environ["SYMFORM_CACHE_DIR"] = tempfile.mkdtemp(prefix="symform-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SYMFORM_CACHE_DIR"], ignore_errors=True)

# Properties draw new examples on every run, which is how a counterexample is found. CI instead runs each on the
# same examples every time (SYMFORM_TEST_PROFILE=ci, set by .ci/run): whether a change lands is decided by the
# change, not by the draw; a counterexample found elsewhere is kept as an @example.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True)
if os.environ.get("SYMFORM_TEST_PROFILE") == "ci":
    settings.load_profile("ci")
