"""The networks an ActorQ learner trains, as the policies package deploys them.

A learner holds an fp32 torch MLP: the actor of a policies preset (``policies.actor.DiscreteActor``) or
the Q-network of an SB3 DQN (``model.q_net.q_net``, ``Sequential(Linear, ReLU, ..., Linear)``). Both are
turned into a ``DiscreteActor`` (``as_actor``), whose ONNX export is ``policies.export``'s, and a weight
version is its ``state_dict`` as numpy arrays (``actor_weights``): ``body.0.weight``, ``body.0.bias``, ...,
``head.weight``, ``head.bias``. That mapping is what a learner sends and ``actorq.weights`` takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from actorq.errors import ActorQError
from nav_env.actions import N_DISCRETE_ACTIONS
from nav_env.config import N_STATE_FEATURES
from policies.actor import DiscreteActor
from policies.presets import PRESETS

OBS_DIM = 32 * 32 + N_STATE_FEATURES  # the 1032-float observation of the default camera
# ActorQ's network in its study's measurements: 1032 -> 4096 x 3 -> 25 (37.9M parameters), where int8 pays.
ACTORQ_HIDDEN = (4096, 4096, 4096)
NETWORKS: dict[str, tuple[int, ...]] = {name: preset.actor for name, preset in PRESETS.items()} | {
    "actorq": ACTORQ_HIDDEN
}

Weights = Mapping[str, np.ndarray]


def as_actor(net: nn.Module) -> DiscreteActor:
    """The network as a DiscreteActor sharing its modules (no copy): a DiscreteActor as it is, or a
    ``Sequential`` of Linear and ReLU layers ending in a Linear (SB3 DQN's ``q_net.q_net``)."""
    if isinstance(net, DiscreteActor):
        actor = net
    elif isinstance(net, nn.Sequential):
        layers = list(net)
        if not layers or not isinstance(layers[-1], nn.Linear) or not isinstance(layers[0], nn.Linear):
            raise ActorQError("the network must be a Sequential of Linear and ReLU layers, first and last Linear")
        actor = DiscreteActor(nn.Sequential(*layers[:-1]), layers[-1], layers[0].in_features)
    else:
        raise ActorQError(f"expected a DiscreteActor or an nn.Sequential MLP, got {type(net).__name__}")
    check_mlp(actor)
    return actor


def check_mlp(actor: DiscreteActor) -> None:
    body = list(actor.body) if isinstance(actor.body, nn.Sequential) else [actor.body]
    kinds = [type(m) for m in body]
    if any(k not in (nn.Linear, nn.ReLU) for k in kinds) or not isinstance(actor.head, nn.Linear):
        raise ActorQError(f"only ReLU MLPs are supported (Linear and ReLU layers), got {[k.__name__ for k in kinds]}")
    for i, m in enumerate(body):
        want = nn.Linear if i % 2 == 0 else nn.ReLU
        if not isinstance(m, want):
            raise ActorQError(
                f"layer {i} of the body is {type(m).__name__}, expected {want.__name__} (Linear, ReLU, ...)"
            )


def mlp_actor(
    hidden: tuple[int, ...], obs_dim: int = OBS_DIM, n_actions: int = N_DISCRETE_ACTIONS, seed: int = 0
) -> DiscreteActor:
    """A ReLU MLP with torch's default initialisation, drawn from ``seed`` (the global torch RNG is left as it was)."""
    layers: list[nn.Module] = []
    width = obs_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        head = nn.Linear(width, n_actions)
    return DiscreteActor(nn.Sequential(*layers), head, obs_dim).eval()


def network_actor(name: str, seed: int = 0) -> DiscreteActor:
    """A network by name: a policies preset (``policy1``, ``policy2``, ``policy3``) or ``actorq``."""
    if name not in NETWORKS:
        raise ActorQError(f"unknown network {name!r} (known: {', '.join(NETWORKS)})")
    return mlp_actor(NETWORKS[name], seed=seed)


def actor_weights(net: nn.Module, copy: bool = True) -> dict[str, np.ndarray]:
    """The weight version of a network: its DiscreteActor ``state_dict`` as float32 numpy arrays (copies by
    default: a learner keeps training the tensors it came from)."""
    actor = as_actor(net)
    out = {}
    for name, tensor in actor.state_dict().items():
        array = tensor.detach().cpu().numpy()
        out[name] = np.array(array, dtype=np.float32, copy=True) if copy else array
    return out


def load_weights(net: nn.Module, weights: Weights) -> None:
    """Write a weight version into a network of the same shape (in place)."""
    actor = as_actor(net)
    state = actor.state_dict()
    missing, extra = sorted(set(state) - set(weights)), sorted(set(weights) - set(state))
    if missing or extra:
        raise ActorQError(f"weights do not fit the network: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, tensor in state.items():
            value = np.asarray(weights[name])
            if value.shape != tuple(tensor.shape):
                raise ActorQError(f"weights {name}: shape {value.shape}, the network has {tuple(tensor.shape)}")
            tensor.copy_(torch.as_tensor(value, dtype=tensor.dtype))


def actor_from_onnx(path: str | Path) -> DiscreteActor:
    """The torch MLP of an fp32 policy file (``policies.export``'s Gemm/Relu chain): to start a learner
    from a shipped policy, or to measure with trained weights. The weights are the file's, bit for bit."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx
    from onnx import helper, numpy_helper

    path = Path(path)
    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ActorQError(f"{path}: not a readable ONNX file ({type(e).__name__})") from None
    inits = {t.name: t for t in model.graph.initializer}
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    others = {n.op_type for n in model.graph.node} - {"Gemm", "Relu", "ArgMax", "Identity"}
    if not gemms or others:
        raise ActorQError(f"{path}: not an fp32 Gemm/Relu MLP (found {sorted(others) or 'no Gemm'}; quantized?)")
    relus = sum(n.op_type == "Relu" for n in model.graph.node)
    if relus != len(gemms) - 1:
        raise ActorQError(f"{path}: {len(gemms)} Gemms and {relus} Relus: not a ReLU MLP")
    layers: list[nn.Linear] = []
    for node in gemms:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
            raise ActorQError(f"{path}: Gemm {node.name} with alpha/beta/transA is not a Linear layer")
        if len(node.input) < 3 or node.input[1] not in inits or node.input[2] not in inits:
            raise ActorQError(f"{path}: Gemm {node.name} without initializer weights and bias")
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
        w = w if attrs.get("transB", 0) else w.T
        b = numpy_helper.to_array(inits[node.input[2]]).astype(np.float32)
        layer = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            layer.weight.copy_(torch.as_tensor(np.ascontiguousarray(w)))
            layer.bias.copy_(torch.as_tensor(b))
        layers.append(layer)
    for a, b_ in zip(layers, layers[1:]):
        if a.out_features != b_.in_features:
            raise ActorQError(f"{path}: the Gemms do not form a chain ({a.out_features} -> {b_.in_features})")
    body: list[nn.Module] = []
    for layer in layers[:-1]:
        body += [layer, nn.ReLU()]
    return DiscreteActor(nn.Sequential(*body), layers[-1], layers[0].in_features).eval()
