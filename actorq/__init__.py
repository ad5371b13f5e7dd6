"""actorq: ActorQ (QuaRL's distributed actor-learner RL with int8 actors) for airq, issue 17.

What exists so far is its first building block, the weight-version pipeline (docs/actorq.md):

* ``actorq.nets``: the networks an fp32 learner trains (the policies' MLP presets, SB3 DQN's q_net) as
  ``policies.actor.DiscreteActor``, and their weights as a plain ``{name: numpy array}`` mapping;
* ``actorq.weights``: an ONNX template built once per run (fp32, or int8 with quantize's static-int8
  recipe, calibrated on observations); each new weight version goes into it with numpy (int8: weight
  scales recomputed per tensor, activation scales kept from the calibration) and comes out as ONNX bytes
  tagged with its version number;
* ``actorq.holder``: the actor's onnxruntime session, swapped whole between rollouts;
* ``python -m actorq.bench_weights``: the cost of one weight version against a full re-export and
  ``quantize_static``.

The Ray parts (learner, rollout actors, broadcaster, ``actorq.train``) are not built yet.
"""
