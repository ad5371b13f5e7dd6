"""Whether this machine gives the memory tests a memory cgroup, and CI's demand that it does.

Without root or a writable cgroup the cgroup tests skip with the reason; AIRQ_REQUIRE_CGROUP=1 (set
by .ci/run as root, like AIRQ_REQUIRE_NETNS) turns that into an error at collection, so CI cannot
pass without running the memory experiments.
"""

import os

from device_emulation.memlimit import memory_cgroup_support

SUPPORT = memory_cgroup_support()
if not SUPPORT.available and os.environ.get("AIRQ_REQUIRE_CGROUP") == "1":
    raise RuntimeError(f"AIRQ_REQUIRE_CGROUP=1 but the memory tests cannot run: {SUPPORT.reason}")
