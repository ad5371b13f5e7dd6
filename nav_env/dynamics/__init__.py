"""Rigid-body flight for nav_env: a MuJoCo quadrotor under a cascaded flight controller (the ``mujoco`` backend).

Needs the ``dynamics`` extra (``pip install 'airq[dynamics]'``, MuJoCo). ``nav_env.dynamics.config`` and
``nav_env.dynamics.controller`` import without it; ``nav_env.dynamics.world`` (``MujocoSim``) needs it.
"""
