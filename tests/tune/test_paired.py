"""The paired check's sequential test: a clear gain adopted after two blocks (a far larger one after one), a neutral
candidate rarely adopted,
a far worse first block rejected at once, the knob's minimum gain respected."""

from __future__ import annotations

import math
import random

from streamscope.tune import Noise, Paired


def _run(gain: float, sd: float, rng: random.Random, min_gain: float = 0.01) -> tuple[str, int]:
    test = Paired(Noise(), min_gain)
    while True:
        a = 1.0
        b = math.exp(math.log(1 - gain) + rng.gauss(0.0, sd))  # the candidate's period: shorter is better
        test.add(a, b)
        verdict = test.verdict()
        if verdict is not None:
            return verdict, len(test.ratios)


def test_a_clear_gain_is_adopted_after_two_blocks():
    rng = random.Random(1)
    assert all(_run(0.3, 0.02, rng) == ("adopt", 2) for _ in range(50))


def test_a_gain_far_beyond_the_prior_noise_is_adopted_after_one_block():
    rng = random.Random(4)
    assert all(_run(0.6, 0.02, rng) == ("adopt", 1) for _ in range(50))  # the latency-bound first move: 2.5x
    # a 20% gain that a learnt small noise would show after one block still waits for the second
    test = Paired(Noise(0.01**2 * 20, 20))
    test.add(1.0, 0.85)
    assert test.interval()[1] > 0.01 and test.verdict() is None


def test_a_neutral_candidate_is_rarely_adopted_and_never_runs_past_five_blocks():
    rng = random.Random(2)
    runs = [_run(0.0, 0.05, rng) for _ in range(1000)]
    adopted = sum(v == "adopt" for v, _n in runs)
    assert adopted <= 25, adopted  # under 2.5% of neutral candidates
    assert max(n for _v, n in runs) <= 5


def test_a_far_worse_first_block_is_rejected_at_once():
    test = Paired(Noise())
    test.add(1.0, 1.2)
    assert test.verdict() == "reject" and len(test.ratios) == 1


def test_the_minimum_gain_is_the_knobs():
    rng = random.Random(3)
    assert _run(0.05, 0.005, random.Random(3))[0] == "adopt"
    assert _run(0.05, 0.005, rng, min_gain=0.2)[0] == "reject"
