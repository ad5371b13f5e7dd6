import sys
from pathlib import Path

# cgroup_support (the AIRQ_REQUIRE_CGROUP gate) lives with the cgroup tooling's tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "device_emulation"))
# report_pages (study.html in headless Chromium) is shared by the tests of every report page
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
