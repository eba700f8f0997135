"""Checkpoint averaging: which steps are averaged, and that the mean is the plain mean."""
import numpy as np

from models.translate.averaging import Average, snapshot_steps
from models.transformer import Transformer


def test_snapshot_steps_are_the_last_validations():
    assert snapshot_steps(4000, 500, 4) == (2500, 3000, 3500, 4000)
    assert snapshot_steps(4100, 500, 3) == (3500, 4000, 4100)  # the last step always validates
    assert snapshot_steps(100, 500, 4) == (100,)
    assert snapshot_steps(4000, 500, 1) == ()


def test_the_average_is_the_mean_of_the_weights_at_the_chosen_steps():
    models = [Transformer(7, 9, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16)
              for _ in range(3)]
    average = Average((20, 30))
    for step, model in zip((10, 20, 30), models):  # step 10 is not averaged
        average.add(step, model)
    average.add(30, models[0])  # a step is taken once
    assert average.taken == [20, 30]
    for name, mean in average.mean().items():
        a, b = models[1].state_dict()[name], models[2].state_dict()[name]
        np.testing.assert_allclose(mean, (a + b) / 2, rtol=1e-6)

    again = Average((20, 30))
    again.load_state_dict(average.state_dict())
    assert again.taken == [20, 30] and again.mean().keys() == average.mean().keys()
    moved = Average((40, 50))  # resumed with other --steps: the saved sum is not for these steps
    moved.load_state_dict(average.state_dict())
    assert moved.taken == [] and moved.sum == {}
