# coding=utf-8
"""A learning-curve picture (PNG) from NumPy and the standard library.

The `Runner` draws the average training and evaluation returns per iteration
after every iteration. Matplotlib would be a large dependency for one line
chart, so this module rasterizes the chart itself (lines, axes, grid and
labels in a built-in 5x7 pixel font) into an RGB array and encodes it with
`write_png` (zlib and struct: a valid 8-bit RGB PNG). New, with no Dopamine
counterpart: docs/compat.md#learning_curve.
"""

import struct
import zlib
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from dopamine_per.file_io import atomic_files

__all__ = ['write_png', 'encode_png', 'render_learning_curve',
           'plot_learning_curve']

Color = Tuple[int, int, int]

# 5x7 glyphs: each string is a row, '#' a lit pixel.
_GLYPHS = {
    '0': ('.###.', '#...#', '#..##', '#.#.#', '##..#', '#...#', '.###.'),
    '1': ('..#..', '.##..', '..#..', '..#..', '..#..', '..#..', '.###.'),
    '2': ('.###.', '#...#', '....#', '...#.', '..#..', '.#...', '#####'),
    '3': ('####.', '....#', '....#', '.###.', '....#', '....#', '####.'),
    '4': ('...#.', '..##.', '.#.#.', '#..#.', '#####', '...#.', '...#.'),
    '5': ('#####', '#....', '####.', '....#', '....#', '#...#', '.###.'),
    '6': ('.###.', '#....', '#....', '####.', '#...#', '#...#', '.###.'),
    '7': ('#####', '....#', '...#.', '..#..', '.#...', '.#...', '.#...'),
    '8': ('.###.', '#...#', '#...#', '.###.', '#...#', '#...#', '.###.'),
    '9': ('.###.', '#...#', '#...#', '.####', '....#', '....#', '.###.'),
    '.': ('.....', '.....', '.....', '.....', '.....', '.##..', '.##..'),
    '-': ('.....', '.....', '.....', '#####', '.....', '.....', '.....'),
    ' ': ('.....',) * 7,
    'A': ('.###.', '#...#', '#...#', '#####', '#...#', '#...#', '#...#'),
    'E': ('#####', '#....', '#....', '####.', '#....', '#....', '#####'),
    'G': ('.###.', '#...#', '#....', '#.###', '#...#', '#...#', '.###.'),
    'I': ('.###.', '..#..', '..#..', '..#..', '..#..', '..#..', '.###.'),
    'L': ('#....', '#....', '#....', '#....', '#....', '#....', '#####'),
    'N': ('#...#', '##..#', '#.#.#', '#..##', '#...#', '#...#', '#...#'),
    'O': ('.###.', '#...#', '#...#', '#...#', '#...#', '#...#', '.###.'),
    'P': ('####.', '#...#', '#...#', '####.', '#....', '#....', '#....'),
    'R': ('####.', '#...#', '#...#', '####.', '#.#..', '#..#.', '#...#'),
    'S': ('.####', '#....', '#....', '.###.', '....#', '....#', '####.'),
    'T': ('#####', '..#..', '..#..', '..#..', '..#..', '..#..', '..#..'),
    'U': ('#...#', '#...#', '#...#', '#...#', '#...#', '#...#', '.###.'),
    'V': ('#...#', '#...#', '#...#', '#...#', '#...#', '.#.#.', '..#..'),
}
_GLYPH_ARRAYS = {c: np.array([[ch == '#' for ch in row] for row in rows])
                 for c, rows in _GLYPHS.items()}

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GRID: Color = (225, 225, 225)
TRAIN_COLOR: Color = (230, 120, 20)
EVAL_COLOR: Color = (30, 90, 200)


def encode_png(image: np.ndarray) -> bytes:
  """Returns the PNG encoding of an RGB image.

  Args:
    image: uint8 array [height, width, 3].

  Raises:
    ValueError: If the image is not [h, w, 3] uint8 with h, w > 0.
  """
  image = np.asarray(image)
  if (image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or
      image.shape[0] == 0 or image.shape[1] == 0):
    raise ValueError('expected a [h, w, 3] uint8 image, got {} {}'.format(
        image.dtype, image.shape))
  height, width, _ = image.shape

  def chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack('>I', len(data)) + kind + data +
            struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))

  # Filter type 0 (none) before each row.
  rows = np.concatenate([np.zeros((height, 1), np.uint8),
                         image.reshape(height, width * 3)], axis=1)
  header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) +
          chunk(b'IDAT', zlib.compress(rows.tobytes(), 9)) +
          chunk(b'IEND', b''))


def write_png(path: str, image: np.ndarray) -> None:
  """Writes an RGB image as a PNG file, atomically.

  Args:
    path: str, the destination.
    image: uint8 array [height, width, 3].
  """
  data = encode_png(image)
  atomic_files.atomic_write(path, lambda f: f.write(data))


def _text(canvas: np.ndarray, text: str, x: int, y: int, color: Color,
          scale: int = 1, align: str = 'left') -> None:
  """Draws `text` with its top at y; x is its left, right or center edge."""
  width = (6 * len(text) - 1) * scale
  if align == 'right':
    x -= width
  elif align == 'center':
    x -= width // 2
  for char in text.upper():
    glyph = _GLYPH_ARRAYS.get(char, _GLYPH_ARRAYS[' '])
    pixels = np.kron(glyph, np.ones((scale, scale), bool))
    h, w = pixels.shape
    y0, x0 = max(y, 0), max(x, 0)
    y1, x1 = min(y + h, canvas.shape[0]), min(x + w, canvas.shape[1])
    if y1 > y0 and x1 > x0:
      region = canvas[y0:y1, x0:x1]
      region[pixels[y0 - y:y1 - y, x0 - x:x1 - x]] = color
    x += 6 * scale


def _line(canvas: np.ndarray, x0: float, y0: float, x1: float, y1: float,
          color: Color, thickness: int = 1) -> None:
  """Draws a segment by dense sampling (fine for charts of this size)."""
  steps = int(max(abs(x1 - x0), abs(y1 - y0), 1) * 2) + 1
  xs = np.rint(np.linspace(x0, x1, steps)).astype(int)
  ys = np.rint(np.linspace(y0, y1, steps)).astype(int)
  r = thickness // 2
  for dy in range(-r, thickness - r):
    for dx in range(-r, thickness - r):
      yy = np.clip(ys + dy, 0, canvas.shape[0] - 1)
      xx = np.clip(xs + dx, 0, canvas.shape[1] - 1)
      canvas[yy, xx] = color


def _format(value: float) -> str:
  if abs(value - round(value)) < 1e-9:
    return str(int(round(value)))
  return '{:.1f}'.format(value)


def _nice_step(span: float, ticks: int = 5) -> float:
  raw = max(span, 1e-9) / ticks
  magnitude = 10 ** np.floor(np.log10(raw))
  for factor in (1, 2, 2.5, 5, 10):
    if factor * magnitude >= raw:
      return float(factor * magnitude)
  return float(10 * magnitude)


def render_learning_curve(series: Dict[str, Tuple[Sequence[float],
                                                  Sequence[float], Color]],
                          title: str = 'AVERAGE RETURN PER ITERATION',
                          width: int = 720, height: int = 440) -> np.ndarray:
  """Renders line series on shared axes.

  Args:
    series: dict of label -> (x values, y values, color); empty series are
      skipped. Labels use the letters of the built-in font (A E G I L N O P
      R S T U V, digits, '.', '-' and space).
    title: str, drawn at the top.
    width: int, pixels.
    height: int, pixels.

  Returns:
    uint8 array [height, width, 3].
  """
  canvas = np.full((height, width, 3), 255, np.uint8)
  left, right, top, bottom = 70, width - 20, 50, height - 50
  points = [(np.asarray(x, float), np.asarray(y, float), color)
            for x, y, color in series.values() if len(x)]
  all_x = np.concatenate([p[0] for p in points]) if points else np.zeros(1)
  all_y = np.concatenate([p[1] for p in points]) if points else np.zeros(1)
  finite = np.isfinite(all_y)
  y_low = min(0.0, float(all_y[finite].min())) if finite.any() else 0.0
  y_high = float(all_y[finite].max()) if finite.any() else 1.0
  y_step = _nice_step(y_high - y_low)
  y_low = np.floor(y_low / y_step) * y_step
  y_high = max(np.ceil(y_high / y_step) * y_step, y_low + y_step)
  x_low, x_high = float(all_x.min()), float(all_x.max())
  if x_high <= x_low:
    x_high = x_low + 1.0

  def px(x):
    return left + (np.asarray(x, float) - x_low) / (x_high - x_low) * (
        right - left)

  def py(y):
    return bottom - (np.asarray(y, float) - y_low) / (y_high - y_low) * (
        bottom - top)

  tick = y_low
  while tick <= y_high + 1e-9:
    y = float(py(tick))
    _line(canvas, left, y, right, y, GRID)
    _text(canvas, _format(tick), left - 8, int(y) - 3, BLACK, align='right')
    tick += y_step
  x_step = max(1.0, _nice_step(x_high - x_low))
  tick = np.ceil(x_low / x_step) * x_step
  while tick <= x_high + 1e-9:
    x = float(px(tick))
    _line(canvas, x, bottom, x, bottom + 4, BLACK)
    _text(canvas, _format(tick), int(x), bottom + 9, BLACK, align='center')
    tick += x_step
  _line(canvas, left, top, left, bottom, BLACK)
  _line(canvas, left, bottom, right, bottom, BLACK)
  _line(canvas, left, top, right, top, BLACK)
  _line(canvas, right, top, right, bottom, BLACK)
  _text(canvas, title, width // 2, 14, BLACK, scale=2, align='center')
  _text(canvas, 'ITERATION', (left + right) // 2, height - 20, BLACK,
        align='center')
  for x, y, color in points:
    keep = np.isfinite(y)
    xs, ys = px(x[keep]), py(y[keep])
    for i in range(len(xs) - 1):
      _line(canvas, xs[i], ys[i], xs[i + 1], ys[i + 1], color, thickness=2)
    for cx, cy in zip(xs, ys):
      canvas[max(int(cy) - 2, 0):int(cy) + 3,
             max(int(cx) - 2, 0):int(cx) + 3] = color
  legend_x = left + 10
  for label, (_, _, color) in series.items():
    canvas[top + 10:top + 16, legend_x:legend_x + 16] = color
    _text(canvas, label, legend_x + 22, top + 9, BLACK)
    legend_x += 22 + 6 * len(label) + 24
  return canvas


def plot_learning_curve(path: str, records: Sequence[Dict[str, object]],
                        title: Optional[str] = None) -> None:
  """Writes the train and eval average returns of `records` as a PNG.

  Args:
    path: str, the PNG file.
    records: the `logger.StatisticsLog` records (dicts with 'iteration' and
      optionally 'train_average_return' and 'eval_average_return').
    title: str or None for the default title.
  """
  series = {}
  for label, key, color in (('TRAIN', 'train_average_return', TRAIN_COLOR),
                            ('EVAL', 'eval_average_return', EVAL_COLOR)):
    xs = [r['iteration'] for r in records if r.get(key) is not None]
    ys = [r[key] for r in records if r.get(key) is not None]
    if xs:
      series[label] = (xs, ys, color)
  kwargs = {} if title is None else {'title': title}
  write_png(path, render_learning_curve(series, **kwargs))
