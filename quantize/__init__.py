"""quantize: int8 / fp16 policy artifacts, the seed's n-bit quantizer, QAT, sweeps and weight analysis.

    python -m quantize ptq models/policy1_fp32.onnx --to int8 -o models/policy1_int8.onnx
    python -m quantize ptq models/policy1_fp32.onnx --to int8-dynamic -o models/policy1_int8-dynamic.onnx
    python -m quantize ptq models/policy1_fp32.onnx --to fp16 -o models/policy1_fp16.onnx
    python -m quantize ptq models/policy1_hard_fp32.onnx --to int8 -o models/policy1_hard_int8.onnx \
        --calibration-episodes 100 --heldout-episodes 50 --float-split-sum --distill-steps 2000
    python -m quantize inspect models/policy1_int8.onnx
    python -m quantize bench models/policy1_fp32.onnx models/policy1_fp16.onnx models/policy1_int8.onnx
    python -m quantize analyze runs/p1 --bits 8 4 2
    python -m quantize qat runs/p1 --bits 4 --delay 50000 --steps 300000
    python -m quantize sweep runs/p1 --bits 8 7 6 5 4 3 2 --methods ptq qat --episodes 200

See docs/quantize.md for the choices made and the measured results.
"""
