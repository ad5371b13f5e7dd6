"""actorq: ActorQ (QuaRL's distributed actor-learner RL with int8 actors) for airq (docs/actorq.md).

* ``python -m actorq.train``: an fp32 learner (``actorq.learner``: an SB3 DQN or TD3 fed through its replay
  buffer), N rollout actors (``actorq.rollout``: one env and one onnxruntime session each, int8 or fp32) and a
  broadcaster (``actorq.broadcaster``: each weight version built once, int8 re-calibrated when it parts from
  fp32), as Ray actors (``actorq.cluster``; Ray is the ``[distributed]`` extra), in reproducible rounds;
* ``python -m actorq.bench``: fp32 against int8 actors, the same training per seed;
* the weight-version pipeline under it: ``actorq.nets`` (the learner's network and its weights as numpy),
  ``actorq.weights`` (ONNX templates: int8 with quantize's static recipe, weights re-quantized per version),
  ``actorq.holder`` (the actor's session, swapped whole between rollouts), ``actorq.versions`` (what crosses
  processes, free of torch), ``python -m actorq.bench_weights`` (the cost of one version);
* ``actorq.tasks``: nav (DQN, Policy III-size by default) and Pendulum-v1 (TD3).
"""
