"""Rigid-body flight for nav_env: a MuJoCo quadrotor under a cascaded flight controller (the ``mujoco`` backend).

Needs the ``dynamics`` extra (``pip install 'airq[dynamics]'``: MuJoCo, and Numba for the controller and the camera
culling). ``nav_env.dynamics.config`` and ``nav_env.dynamics.identify``'s design model import without it.
"""
