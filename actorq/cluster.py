"""Ray for ActorQ: starting or joining it, and the learner, broadcaster and rollout actors as Ray actors.

Ray is an optional extra (``pip install 'airq[distributed]'``), imported only here and by the driver; the
learner, broadcaster and rollout worker are plain classes that Ray runs in their own processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actorq.errors import ActorQError
from airq_cli.network import check_ray_head, ray_environment

INSTALL_HINT = "pip install 'airq[distributed]' (Ray, pinned in requirements/lock.txt)"


def require_ray():
    ray_environment()  # before Ray is imported: a driver joining a `ray start` cluster gets in
    try:
        # deferred: ray: optional extra, seconds to import
        import ray
    except ImportError:
        raise ActorQError(f"Ray is not installed: {INSTALL_HINT}") from None
    return ray


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    if address.startswith("ray://"):
        return  # Ray Client addresses are Ray's to check
    check_ray_head(address, ActorQError, timeout_s)


@dataclass(frozen=True)
class RayInfo:
    address: str  # "local" or the cluster's address
    nodes: int
    cpus: float
    resources: dict[str, float]


def start(address: str | None, local_cpus: int) -> RayInfo:
    """A local Ray with ``local_cpus`` logical CPUs (``address`` None), or the cluster at ``address``."""
    ray = require_ray()
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        except Exception as e:
            raise ActorQError(
                f"--address {address}: cannot join the Ray cluster ({str(e).splitlines()[0][:200]})"
            ) from None
    else:
        ray.init(num_cpus=local_cpus, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    resources = {k: float(v) for k, v in ray.cluster_resources().items()}
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return RayInfo(address or "local", nodes, resources.get("CPU", 0.0), resources)


def check_resources(info: RayInfo, actors: int, actor_resource: str | None) -> None:
    """Refuse, with the reason, a cluster on which the actors could never be placed (Ray would wait forever)."""
    if actor_resource:
        have = info.resources.get(actor_resource, 0.0)
        if have < actors:
            raise ActorQError(
                f"the cluster has {have:g} of resource {actor_resource!r}, {actors} actors need 1 each "
                f"(ray start ... --resources='{{\"{actor_resource}\": {actors}}}' on the actors' machine)"
            )
    if info.cpus < actors + 1:
        raise ActorQError(
            f"the Ray cluster has {info.cpus:g} CPUs: the learner and {actors} actors need {actors + 1} (one each)"
        )


def get(refs: Any) -> Any:
    """``ray.get``, except that an ActorQError raised inside an actor comes back as itself (one line for the user),
    not wrapped in Ray's remote traceback."""
    ray = require_ray()
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, ActorQError):
            raise e.cause from None
        raise


def stop() -> None:
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()


def remote_classes() -> dict[str, Any]:
    """The plain classes as Ray actor classes (made on first use: importing actorq needs no Ray)."""
    ray = require_ray()
    # deferred: torch, onnx, onnxruntime (via actorq.broadcaster, actorq.learner, actorq.rollout): seconds to import
    from actorq.broadcaster import Broadcaster
    from actorq.learner import Learner
    from actorq.rollout import RolloutWorker

    return {
        "learner": ray.remote(num_cpus=1)(Learner),
        "broadcaster": ray.remote(num_cpus=0)(Broadcaster),
        "worker": ray.remote(num_cpus=1)(RolloutWorker),
    }
