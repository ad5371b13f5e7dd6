"""The deployment study (QuaRL Table 4 / Figure 4, our way): every policy at every precision in the closed
loop, a timing pass, the roofline check and Pi predictions, and the memory stage.

    python -m deployment_study --sim-only --profile pi3b --episodes 400 --levels default hard --out out/study

It sits on top of every stage (it flies hil's loop, widens policies, quantizes the wide one), so it lives
in its own package: hil stays the closed loop and depends only on nav_env and the bridge.
"""
