"""Coverage-vs-slots curves as a hand-written SVG (no plotting dependency).

Slots on a log axis, hit ratio 0..1; Belady's MIN drawn as a dashed grey ceiling, the online
policies as coloured lines.
"""

import math
from html import escape

WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 40, 60
COLOURS = {
    "lru": "#1f77b4",
    "lfu": "#ff7f0e",
    "decay_bandit": "#2ca02c",
    "recency": "#9467bd",
    "prefill_pin": "#8c564b",
}
CEILING = "belady"


def curve_svg(slots, hit, title="coverage vs cache slots"):
    """SVG text for curves `hit` {policy: [ratio per slots entry]} over `slots` (ascending ints)."""
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    lo = math.log10(max(1, slots[0]))
    hi = math.log10(max(slots[-1], slots[0] + 1))
    span = hi - lo or 1.0

    def x(s):
        return LEFT + (math.log10(max(s, 1)) - lo) / span * plot_w

    def y(v):
        return TOP + (1 - v) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="{TOP - 14}" font-size="15">{escape(title)}</text>',
    ]
    for tick in range(0, 11, 2):
        v = tick / 10
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + plot_w}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    decade = 10 ** math.floor(lo)
    while decade <= 10 ** hi * 1.0001:
        if decade >= 10**lo * 0.9999:
            out.append(f'<line x1="{x(decade):.1f}" y1="{TOP}" x2="{x(decade):.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
            out.append(f'<text x="{x(decade):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{decade:g}</text>')
        decade *= 10
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 16}" text-anchor="middle">cache slots (layer, expert), log scale</text>')
    out.append(f'<text x="18" y="{TOP + plot_h / 2}" text-anchor="middle" transform="rotate(-90 18 {TOP + plot_h / 2})">'
               "hit ratio over decode requests</text>")
    order = [name for name in hit if name == CEILING] + [name for name in hit if name != CEILING]
    for rank, name in enumerate(order):
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(slots, hit[name]))
        if name == CEILING:
            style = 'stroke="#555" stroke-width="2.5" stroke-dasharray="7 4"'
            label = "belady (ceiling)"
        else:
            style = f'stroke="{COLOURS.get(name, "#333")}" stroke-width="1.8"'
            label = name
        out.append(f'<polyline fill="none" {style} points="{points}"><title>{escape(label)}</title></polyline>')
        ly = TOP + 10 + rank * 20
        out.append(f'<line x1="{LEFT + plot_w + 14}" y1="{ly}" x2="{LEFT + plot_w + 40}" y2="{ly}" {style}/>')
        out.append(f'<text x="{LEFT + plot_w + 46}" y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
