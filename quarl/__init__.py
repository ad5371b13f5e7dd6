"""quarl: the QuaRL quantization study on standard tasks, on top of policies and quantize.

    python -m quarl run configs/quarl/cpu.toml            # train, quantize, sweep, QAT, evaluate (Ray Tune)
    python -m quarl report out/quarl/cpu                  # Table 2, Figure 1-3 style outputs

Every (task, algorithm, seed) is one Ray Tune trial (``quarl.tune_runner``) running ``quarl.pipeline.run_trial``:
SB3 training with the RL Zoo's hyperparameters (``quarl.zoo``), ONNX export (``quarl.export``), fp16 / static
int8 / dynamic int8 PTQ (``quantize.ptq``), the seed's n-bit PTQ sweep and QAT (``quantize.fakequant``), and
paired evaluation on the same seeded episodes (``quarl.evaluate``). Results: ``quarl.results``.
See docs/quarl.md.
"""
