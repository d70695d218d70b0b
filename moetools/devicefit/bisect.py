"""The one search device-fit's answers share: the smallest value at which a plan fits."""


def smallest(fits, low, high, step=1):
    """The smallest value in (low, high], to `step`, for which fits() holds, or None when fits(high) does
    not. fits must be monotone (False up to some value, True from it): a placement's memory only falls as
    a card grows, as --n-cpu-moe rises or -ngl falls."""
    if not fits(high):
        return None
    while high - low > step:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high
