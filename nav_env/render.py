"""Top-down map and depth image as an RGB array, and PNG/GIF output, with numpy alone."""

from __future__ import annotations

import io
import math
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from airq_cli import write_atomic
from nav_env.arena import FAR
from nav_env.config import NavConfig
from nav_env.sim import BatchSim

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn: the env renders without it
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

PX_PER_M = 10
PANEL = 320  # pixels: each panel is PANEL x PANEL
MARGIN = 10  # pixels of wall colour around the arena in the map panel

RGB = tuple[int, int, int]
COLORS: dict[str, RGB] = {
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
    scale = map_scale(cfg)
    img = np.empty((PANEL, PANEL, 3), np.uint8)
    img[:] = COLORS["wall"]
    ys, xs = np.mgrid[0:PANEL, 0:PANEL]
    wx = (xs - MARGIN + 0.5) / scale  # world x of each pixel
    wy = a.size_y - (ys - MARGIN + 0.5) / scale  # world y (image rows go south)
    inside = (wx >= 0) & (wx <= a.size_x) & (wy >= 0) & (wy <= a.size_y)
    img[inside] = COLORS["floor"]

    def paint(mask: np.ndarray, color: RGB) -> None:
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
            img,
            trajectory[:, :2],
            lambda p: (MARGIN + p[:, 0] * scale, MARGIN + (a.size_y - p[:, 1]) * scale),
            COLORS["path"],
        )
    paint(np.hypot(wx - px, wy - py) <= cfg.vehicle.radius * 1.3, COLORS["vehicle"])
    return img


def map_scale(cfg: NavConfig) -> float:
    """Pixels per metre of the map panel: the arena's longer side spans the panel less its margins."""
    return (PANEL - 2 * MARGIN) / max(cfg.arena.size_x, cfg.arena.size_y)


def map_extent(cfg: NavConfig) -> tuple[float, float, float, float]:
    """(left, right, bottom, top) of the whole map panel in world metres (x east, y north), for imshow."""
    scale = map_scale(cfg)
    top = cfg.arena.size_y + MARGIN / scale
    return -MARGIN / scale, (PANEL - MARGIN) / scale, top - PANEL / scale, top


def _polyline(
    img: np.ndarray, pts: np.ndarray, to_px: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], color: RGB
) -> None:
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


def figure_png(fig: Figure) -> bytes:
    """A matplotlib figure as PNG bytes (110 dpi), the figure closed; write it with write_atomic."""
    # deferred: matplotlib: plots only
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay the figure out (tight_layout, unless it has a layout engine of its own) and write it as a PNG,
    atomically."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    return write_atomic(path, figure_png(fig))


def save_gif(path: str | os.PathLike, frames: Iterable[np.ndarray], fps: int = 10, hold_last_s: float = 0.0) -> Path:
    """Animated GIF through Pillow (a host-side dependency); ``frames`` may be a generator (each frame is
    reduced to a palette as it comes). ``hold_last_s``: show the last frame that long."""
    # deferred: PIL: GIFs only
    from PIL import Image

    images = [Image.fromarray(f).quantize(256, method=Image.Quantize.FASTOCTREE) for f in frames]
    durations = [int(1000 / fps)] * len(images)
    if hold_last_s:
        durations[-1] = max(durations[-1], int(1000 * hold_last_s))
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0)
    return write_atomic(path, buf.getvalue())


# ------------------------------------------------------------------ pictures that read alone (host side)
FIGURE_DPI = 110
OUTCOME_COLORS = {"success": "#1a7f37", "collision": "#b42318", "timeout": "#b54708"}


def episode_title(
    name: str, outcome: str | None, steps: int | None, episode: int | None = None, seed: int | None = None
) -> str:
    """``policy1_int8, episode 0 (seed 0): SUCCESS, reached the goal in 84 steps``; ``outcome`` is
    success, collision or timeout (None: still flying)."""
    where = name
    if episode is not None:
        where += f", episode {episode}" + (f" (seed {seed})" if seed is not None else "")
    elif seed is not None:
        where += f", seed {seed}"
    n = f"{steps} steps" if steps is not None else "?"
    how = {
        "success": f"SUCCESS, reached the goal in {n}",
        "collision": f"COLLISION after {n}",
        "timeout": f"TIMEOUT, goal not reached in {n} (the limit)",
        None: f"step {steps}" if steps is not None else "",
    }.get(outcome, f"{outcome} after {n}")
    return f"{where}: {how}" if how else where


class EpisodeFigure:
    """:func:`render_frame`'s picture in a matplotlib figure that reads without a caption: a title (policy,
    outcome), the map in metres with a scale bar and a legend for every colour, and the depth panel with
    its axes (bearing, elevation) and a colour bar of distance. One figure is reused: :meth:`draw` a frame,
    then take :meth:`rgb` (a GIF frame) or :meth:`png`.

    ``cfg`` (the level the frame was drawn for) gives the scale, camera field of view and range; without
    it the picture has no scale bar and the depth is shown as a fraction of the camera range. matplotlib
    is imported here, not with the module: nav_env itself runs without it.
    """

    WIDTH, HEIGHT = 11.0, 6.4  # inches

    def __init__(self, cfg: NavConfig | None, dpi: float = FIGURE_DPI) -> None:
        # deferred: matplotlib: plots only
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        self.cfg = cfg
        W, H = self.WIDTH, self.HEIGHT
        fig = self.fig = Figure(figsize=(W, H), dpi=dpi)
        self.canvas = FigureCanvasAgg(fig)  # Agg: rgb() and animate() read its pixel buffer

        def box(left: float, bottom: float, width: float, height: float) -> Axes:  # inches -> figure fractions
            return fig.add_axes((left / W, bottom / H, width / W, height / H))

        self._title = fig.text(0.5, 6.12 / H, "", ha="center", va="center", fontsize=13, weight="bold")
        self._subtitle = fig.text(0.5, 5.82 / H, "", ha="center", va="center", fontsize=9.5, color="0.25")

        # the map, in world metres (x east, y north)
        side = 4.7
        self.ax_map = ax = box(0.3, 0.62, side, side)
        extent = map_extent(cfg) if cfg is not None else (0, PANEL, 0, PANEL)
        self._map = ax.imshow(np.zeros((PANEL, PANEL, 3), np.uint8), extent=extent, interpolation="antialiased")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(1.0, -0.015, "north up", transform=ax.transAxes, ha="right", va="top", fontsize=8, color="0.3")
        if cfg is not None:
            # deferred: mpl_toolkits: plots only
            from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

            metres = _nice_length(max(cfg.arena.size_x, cfg.arena.size_y) / 4)
            ax.add_artist(
                AnchoredSizeBar(
                    ax.transData,
                    metres,
                    f"{metres:g} m",
                    loc="upper left",
                    bbox_to_anchor=(0.0, -0.01),
                    bbox_transform=ax.transAxes,
                    frameon=False,
                    size_vertical=extent[1] / 120,
                    label_top=False,
                    sep=3,
                    pad=0.1,
                    borderpad=0.1,
                    fontproperties={"size": 9},
                )
            )

        # the depth image: bearing across, elevation up, distance as grey
        cam = cfg.camera if cfg is not None else None
        if cam is not None:
            half_h = cam.fov_deg / 2
            tan_v = (
                math.tan(math.radians(half_h)) * cam.height / cam.width
                if cam.vfov_deg == 0
                else math.tan(math.radians(cam.vfov_deg / 2))
            )
            half_v = math.degrees(math.atan(tan_v))
            aspect = math.tan(math.radians(half_h)) / tan_v
            rng, unit = cam.max_range, "m"
        else:
            half_h = half_v = aspect = 1.0
            rng, unit = 1.0, "of the camera range"
        size = 2.75
        dw, dh = (size, size / aspect) if aspect >= 1 else (size * aspect, size)
        top, left = 5.32, 5.9
        self.ax_depth = dax = box(left, top - dh, dw, dh)
        self._depth = dax.imshow(
            np.zeros((PANEL, PANEL), np.uint8),
            cmap="gray",
            vmin=0,
            vmax=255,
            extent=(-half_h, half_h, -half_v, half_v),
            aspect="auto",
            interpolation="nearest",
        )
        if cam is not None:
            dax.set_xticks([-half_h, 0, half_h], [f"{half_h:.0f}° left", "ahead", f"{half_h:.0f}° right"])
            dax.set_yticks([-half_v, 0, half_v], [f"{half_v:.0f}° down", "horizon", f"{half_v:.0f}° up"])
        else:
            dax.set_xticks([-1, 0, 1], ["left", "ahead", "right"])
            dax.set_yticks([-1, 0, 1], ["down", "horizon", "up"])
        dax.tick_params(labelsize=8)
        cax = box(left + dw + 0.15, top - dh, 0.14, dh)
        bar = fig.colorbar(ScalarMappable(Normalize(0, rng), "gray"), cax=cax)
        bar.ax.tick_params(labelsize=8)
        far = f"far (≥ {rng:g} m, the camera range)" if cam is not None else "far (the camera range)"
        bar.set_label(f"distance ({unit})\nblack = near, white = {far}", fontsize=8)
        if cam is not None and (cam.dropout > 0 or cam.noise_std > 0):
            note = "; ".join(
                ([f"depth noise {cam.noise_std:.0%} of the range"] if cam.noise_std > 0 else [])
                + ([f"black specks: no return ({cam.dropout:.0%} dropout)"] if cam.dropout > 0 else [])
            )
            fig.text(left / W, 2.12 / H, note, fontsize=8, color="0.3", va="center")

        # the legend: every colour of the map
        def rgb(key: str) -> tuple[float, float, float]:
            r, g, b = COLORS[key]
            return r / 255, g / 255, b / 255

        def dot(key: str, size: float = 7, **kw: Any) -> Line2D:
            return Line2D([], [], ls="", marker="o", ms=size, mfc=rgb(key), mec=rgb(key), **kw)

        fov = f" ({cam.fov_deg:.0f}°, out to {cam.max_range:g} m)" if cam is not None else ""
        radius = f" {cfg.task.success_radius:g} m" if cfg is not None else ""
        handles: list[tuple[Any, str]] = [
            (dot("start"), "start"),
            (
                (dot("goal", 4), Line2D([], [], ls="", marker="o", ms=13, mfc="none", mec=rgb("goal"))),
                f"goal; ring = success radius{radius}",
            ),
            (Line2D([], [], color=rgb("path"), lw=2), "path flown"),
            (dot("vehicle"), "vehicle"),
            (Patch(color=rgb("static")), "static obstacle (pillar, box)"),
            (Patch(color=rgb("moving")), "moving obstacle"),
            (Patch(color=rgb("fov")), f"camera field of view{fov}"),
            (Patch(color=rgb("wall")), "outside the arena (walls)"),
        ]
        fig.legend(
            [h for h, _ in handles],
            [label for _, label in handles],
            loc="upper left",
            bbox_to_anchor=(5.3 / W, 2.0 / H),
            ncol=2,
            fontsize=8.5,
            frameon=False,
            handlelength=2.2,
            columnspacing=1.5,
        )

    def draw(
        self,
        frame: np.ndarray,
        title: str,
        subtitle: str = "",
        when: str = "at the last step",
        outcome: str | None = None,
    ) -> EpisodeFigure:
        """Show ``frame`` (render_frame's array) under ``title`` (coloured by ``outcome``: success,
        collision, timeout); ``when``: the moment the map and the camera show."""
        self._map.set_data(frame[:, :PANEL])
        self._depth.set_data(frame[:, PANEL:, 0])
        self._title.set_text(title)
        self._title.set_color(OUTCOME_COLORS.get(outcome or "", "black"))
        self._subtitle.set_text(subtitle)
        self._when(when)
        return self

    def _when(self, when: str) -> None:
        self._map_title(when)
        self.ax_depth.set_title(f"forward depth camera, {when}", fontsize=10)

    def _map_title(self, when: str) -> None:
        a = self.cfg.arena if self.cfg is not None else None
        arena = f" of the {a.size_x:g} m x {a.size_y:g} m arena" if a is not None else ""
        self.ax_map.set_title(f"top-down map{arena}, {when}", fontsize=10)

    def rgb(self) -> np.ndarray:
        """The figure as an (H, W, 3) uint8 array."""
        self.canvas.draw()
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png")
        return buf.getvalue()

    def animate(
        self, frames: list[np.ndarray], whens: list[str], title: str, subtitle: str = "", outcome: str | None = None
    ) -> Iterator[np.ndarray]:
        """(H, W, 3) arrays, one per frame with its ``whens`` label, for a GIF. matplotlib draws the figure
        once; each frame redraws the panel titles and pastes the two panels in with numpy (nearest pixel),
        some ten times faster than drawing the images."""
        canvas = self.canvas
        self.draw(frames[0], title, subtitle, whens[0], outcome)
        self.ax_depth.set_title("forward depth camera, at the same step", fontsize=10)
        moving = [self._map, self._depth, self.ax_map.title]
        for artist in moving:
            artist.set_animated(True)
        try:
            canvas.draw()
            background = canvas.copy_from_bbox(self.fig.bbox)
            height = int(self.fig.bbox.height)
            boxes = []
            for ax, cols in ((self.ax_map, slice(0, PANEL)), (self.ax_depth, slice(PANEL, 2 * PANEL))):
                b = ax.bbox  # display pixels, origin at the bottom left
                top, bottom = height - round(b.y1), height - round(b.y0)
                left, right = round(b.x0), round(b.x1)
                rows = np.arange(bottom - top) * PANEL // (bottom - top)
                picks = np.arange(right - left) * PANEL // (right - left) + cols.start
                boxes.append((slice(top, bottom), slice(left, right), rows, picks))
            for frame, when in zip(frames, whens):
                canvas.restore_region(background)
                self._map_title(when)
                self.fig.draw_artist(self.ax_map.title)
                image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
                for ys, xs, rows, picks in boxes:
                    image[ys, xs] = frame[rows[:, None], picks[None, :]]
                yield image
        finally:
            for artist in moving:
                artist.set_animated(False)


def save_episode_png(
    path: str | os.PathLike,
    frame: np.ndarray,
    cfg: NavConfig | None,
    title: str,
    subtitle: str = "",
    outcome: str | None = None,
) -> Path:
    """One frame (the episode's last) as a PNG that reads alone (:class:`EpisodeFigure`), written atomically."""
    return write_atomic(path, EpisodeFigure(cfg).draw(frame, title, subtitle, outcome=outcome).png())


def _nice_length(x: float) -> float:
    """The largest 1, 2 or 5 times a power of ten that is at most ``x`` (a scale bar's length)."""
    p = 10 ** math.floor(math.log10(x))
    return next(m * p for m in (5, 2, 1) if m * p <= x)
