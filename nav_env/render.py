"""Top-down map and depth image as an RGB array, and PNG/GIF output, with numpy alone."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

from airq_cli import write_atomic
from nav_env.arena import FAR
from nav_env.config import NavConfig
from nav_env.sim import BatchSim

PX_PER_M = 10
PANEL = 320  # pixels: each panel is PANEL x PANEL

COLORS = {
    "floor": (245, 245, 240),
    "wall": (60, 60, 60),
    "static": (110, 110, 120),
    "moving": (200, 120, 40),
    "path": (30, 90, 220),
    "start": (40, 170, 60),
    "goal": (220, 40, 40),
    "vehicle": (20, 20, 20),
    "fov": (160, 190, 240),
}


def render_frame(
    cfg: NavConfig, sim: BatchSim, i: int, trajectory: np.ndarray | None, depth: np.ndarray | None = None
) -> np.ndarray:
    """(PANEL, 2*PANEL, 3) uint8: the map (north up) with obstacles, path, goal, vehicle and its
    field of view on the left, env ``i``'s depth image on the right (white = far). ``depth`` (H, W)
    in [0, 1] replaces the ray-cast image (the AirSim backend passes its camera's)."""
    return np.concatenate([_map(cfg, sim, i, trajectory), _depth_panel(sim, i, depth)], axis=1)


def _map(cfg: NavConfig, sim: BatchSim, i: int, trajectory: np.ndarray | None) -> np.ndarray:
    a = cfg.arena
    scale = (PANEL - 20) / max(a.size_x, a.size_y)
    img = np.empty((PANEL, PANEL, 3), np.uint8)
    img[:] = COLORS["wall"]
    ys, xs = np.mgrid[0:PANEL, 0:PANEL]
    wx = (xs - 10 + 0.5) / scale  # world x of each pixel
    wy = a.size_y - (ys - 10 + 0.5) / scale  # world y (image rows go south)
    inside = (wx >= 0) & (wx <= a.size_x) & (wy >= 0) & (wy <= a.size_y)
    img[inside] = COLORS["floor"]

    def paint(mask, color):
        img[mask & inside] = color

    # field of view wedge, out to the camera range
    px, py, yaw = sim.pos[i, 0], sim.pos[i, 1], sim.yaw[i]
    rel = np.arctan2(wy - py, wx - px) - yaw
    rel = (rel + np.pi) % (2 * np.pi) - np.pi
    half = np.radians(cfg.camera.fov_deg) / 2
    paint((np.abs(rel) <= half) & (np.hypot(wx - px, wy - py) <= cfg.camera.max_range), COLORS["fov"])
    for x, y, r, vx, vy in sim.cyl[i]:
        if x < FAR:
            paint(np.hypot(wx - x, wy - y) <= r, COLORS["moving" if (vx or vy) else "static"])
    for x0, y0, x1, y1 in sim.box[i]:
        if x0 < FAR:
            paint((wx >= x0) & (wx <= x1) & (wy >= y0) & (wy <= y1), COLORS["static"])
    gx, gy = sim.goal[i, 0], sim.goal[i, 1]
    d_goal = np.hypot(wx - gx, wy - gy)
    paint(np.abs(d_goal - cfg.task.success_radius) < 0.12, COLORS["goal"])
    paint(d_goal <= 0.4, COLORS["goal"])
    if trajectory is not None and len(trajectory):
        sx, sy = trajectory[0, 0], trajectory[0, 1]
        paint(np.hypot(wx - sx, wy - sy) <= 0.4, COLORS["start"])
        _polyline(
            img, trajectory[:, :2], lambda p: (10 + p[:, 0] * scale, 10 + (a.size_y - p[:, 1]) * scale), COLORS["path"]
        )
    paint(np.hypot(wx - px, wy - py) <= cfg.vehicle.radius * 1.3, COLORS["vehicle"])
    return img


def _polyline(img: np.ndarray, pts: np.ndarray, to_px, color) -> None:
    if len(pts) == 1:
        pts = np.repeat(pts, 2, axis=0)
    seg = np.linspace(0, 1, 8)[None, :, None]
    dense = (pts[:-1, None, :] * (1 - seg) + pts[1:, None, :] * seg).reshape(-1, 2)
    cx, cy = to_px(dense)
    cx = np.clip(cx.astype(int), 0, img.shape[1] - 1)
    cy = np.clip(cy.astype(int), 0, img.shape[0] - 1)
    for dx in (0, 1):
        for dy in (0, 1):
            img[np.clip(cy + dy, 0, img.shape[0] - 1), np.clip(cx + dx, 0, img.shape[1] - 1)] = color


def _depth_panel(sim: BatchSim, i: int, depth: np.ndarray | None = None) -> np.ndarray:
    if depth is None:
        depth = sim.depth(np.array([i]))[0]
    h, w = depth.shape
    rows = (np.arange(PANEL) * h // PANEL)[:, None]
    cols = (np.arange(PANEL) * w // PANEL)[None, :]
    g = (depth[rows, cols] * 255).astype(np.uint8)
    return np.repeat(g[:, :, None], 3, axis=2)


def encode_png(rgb: np.ndarray) -> bytes:
    """Minimal PNG encoder (8-bit RGB, no filtering)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def save_png(path: str | os.PathLike, rgb: np.ndarray) -> Path:
    return write_atomic(path, encode_png(rgb))


def figure_png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (110 dpi), the figure closed; write it with write_atomic."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def save_gif(path: str | os.PathLike, frames: list[np.ndarray], fps: int = 10) -> Path:
    """Animated GIF through Pillow (a host-side dependency)."""
    import io

    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return write_atomic(path, buf.getvalue())
