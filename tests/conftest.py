"""How `make test` spreads the tests over two pytest-xdist workers (`-n 2 --dist loadgroup`).

Each worker is its own process with its own fixtures. Tests that share something must run on one worker, one
after the other, as one work unit; and the long units go out first, so that neither worker is left alone with a
long tail. Both are done here, by the scheduler below, from the tables GROUPS and SLOW.

Why not ``@pytest.mark.xdist_group``: with pytest 9.2 and pytest-xdist 3.8.0 (requirements/lock.txt) the mark
is silently ignored. xdist tells the controller a test's group by appending ``@group`` to the node id on the
worker (``item._nodeid``), and pytest 9.2 no longer reads a node id from there
(https://github.com/pytest-dev/pytest-xdist/issues/1386), so marked tests are spread like any others. The
scheduler below groups by file instead, which needs nothing from the workers but the node ids; it still honours
an ``@group`` suffix, should a later xdist send one again.

Without xdist (a plain ``pytest``) nothing here has any effect.
"""

from __future__ import annotations

from typing import Any

import pytest

# Files whose tests must share one worker, by group name (paths relative to the repository root).
GROUPS: dict[str, tuple[str, ...]] = {
    # Machine-wide state that two workers must not change at once: memory cgroups under the machine's cgroup
    # root (test_memfit_cli counts the airq-memfit ones before and after) and swap files (test_memlimit compares
    # /proc/swaps before and after; its reclaim test adds a swap file of its own); test_study's memory stage makes
    # cgroups too.
    "memory": (
        "tests/device_emulation/test_memlimit.py",
        "tests/deployment_study/test_memfit_cli.py",
        "tests/deployment_study/test_study.py",
    ),
    # A network namespace with a veth pair and nftables rules, named and addressed (10.231.x.0/30) after the pid
    # (tests/reliability/netns_link.py): two workers could pick the same subnet.
    "netns": ("tests/reliability/test_network_faults.py", "tests/reliability/test_peer_cap.py"),
    # The behaviour-cloned actor and its exports (tests/quantize/conftest.py, session scope): trained once per
    # worker that needs it.
    "quantize-bc-actor": (
        "tests/quantize/test_bad_input.py",
        "tests/quantize/test_bench_int8.py",
        "tests/quantize/test_distill.py",
        "tests/quantize/test_ptq.py",
        "tests/quantize/test_qat_analyze.py",
    ),
    # The tiny trained Policy I run (tests/policies/conftest.py, session scope): likewise.
    "policies-tiny-run": (
        "tests/policies/test_policies_bad_input.py",
        "tests/policies/test_policies_distill.py",
        "tests/policies/test_policies_end_to_end.py",
        "tests/policies/test_policies_export_parity.py",
    ),
}
# Files whose tests share a module-scoped fixture that holds state or is costly: one running bridge the tests
# talk to in turn (test_fuzz_bridge fuzzes it, then checks it still serves the original policy), or a built
# wheel. Each is its own group, so that the fixture exists once, as in a serial run. (Files whose module fixture
# is a small file written in milliseconds are left free: their tests spread.)
for _path in (
    "tests/firmware_bridge/test_bridge_fuzz.py",
    "tests/reliability/test_auth_and_uploads.py",
    "tests/reliability/test_fuzz_bridge.py",
    "tests/test_hil_client.py",
    "tests/test_wheel.py",
    "tests/actorq/test_actorq_weights.py",
    "tests/actorq/test_actorq_holder.py",
    "tests/quarl/test_study_toy.py",
    "tests/quarl/test_pipeline.py",  # one CartPole trial, trained once, that five of its tests read
):
    GROUPS[_path] = (_path,)
# Tests (all parametrizations of one test function, ``path::name``) that share a module-scoped fixture
# flown once for them: on one worker, as one unit; the file's other tests stay free to spread.
for _test in (
    # the uninterrupted reference run both interruptions are compared with
    "tests/reliability/test_kill_and_resume.py::test_interrupted_run_leaves_a_valid_log_and_resumes",
    # the interrupted first session both resumes start from
    "tests/reliability/test_run_claims_and_resume.py::test_resume_adds_up_every_session_and_keeps_finished_policies",
):
    GROUPS[_test] = (_test,)
GROUP_OF_FILE = {path: group for group, paths in GROUPS.items() for path in paths}

# Roughly how long a unit (a group, or a single test) takes with -n 2 on the 2-core CI VM, in seconds, for the
# long ones (`make test` prints the slowest 25). Longest first; a file's entry covers each of its tests that is
# not in a group. The rest go out after these, in xdist's order.
SLOW: dict[str, float] = {
    "memory": 120,
    "tests/actorq/test_actorq_train.py::test_int8_training_replaces_a_killed_actor_then_resumes_and_exports": 75,
    "tests/actorq/test_actorq_cluster.py": 50,
    "tests/quarl/test_study_toy.py": 120,
    "policies-tiny-run": 110,
    "quantize-bc-actor": 90,
    "tests/reliability/test_fuzz_bridge.py": 35,
    "tests/quarl/test_atari_check.py::test_atari_check_quantizes_every_conv_and_its_agreement_is_reproducible": 35,
    "tests/quarl/test_pipeline.py": 30,
    "netns": 40,
    "tests/reliability/test_run_claims_and_resume.py::test_resume_adds_up_every_session_and_keeps_finished_policies": 55,
    "tests/reliability/test_kill_and_resume.py::test_interrupted_run_leaves_a_valid_log_and_resumes": 35,
    "tests/reliability/test_run_claims_and_resume.py": 15,
    "tests/reliability/test_kill_and_resume.py": 17,
    "tests/hil/test_timing_latency.py": 20,
    "tests/test_cli_contract.py::test_real_tool_outputs_are_readable_by_others": 12,
    "tests/airsim/test_hil_airsim.py": 11,
    "tests/policies/test_latency_training.py": 11,
    "tests/hil/test_report_html.py": 10,
    "tests/hil/test_run.py": 9,
    "tests/hil/test_run_library.py": 8,
    "tests/test_hil_bench.py": 8,
    "tests/nav_env/test_rollout.py::test_bench_and_demo_run": 7,
    "tests/nav_env/test_single_env_speed_equivalence.py": 7,
}


def unit_of(nodeid: str, scope: str) -> str:
    """The work unit of a test: its group if its test function or its file has one, else what xdist made of it
    (the test itself)."""
    if scope != nodeid:  # an xdist_group suffix arrived after all
        return scope
    function = nodeid.split("[", 1)[0]  # path::name, without the parameters
    return GROUP_OF_FILE.get(function) or GROUP_OF_FILE.get(nodeid.split("::", 1)[0], nodeid)


def cost(unit: str) -> float:
    return SLOW.get(unit, SLOW.get(unit.split("::", 1)[0], 0.0))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None  # xdist's own
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):
        """loadgroup with the groups above, handing out the most expensive unit left first."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, super()._split_scope(nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            first = max(self.workqueue, key=cost)  # the first of the most expensive
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return FileGroupScheduling(config, log)
