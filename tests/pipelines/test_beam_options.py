"""What importing `pipelines.core.beam_options` changes in Beam."""
from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory

from pipelines.core import beam_options


def test_the_state_sampler_of_each_bundle_wakes_every_state_sampling_ms():
    # A bundle's end waits for its sampler thread to wake (up to the period): Beam's 200 ms made
    # every stage's end of a tokenize job wait; the sampler of a bundle built now wakes every 20 ms.
    assert statesampler.DEFAULT_SAMPLING_PERIOD_MS == 200
    sampler = statesampler.StateSampler("stage", CounterFactory())
    assert sampler.sampling_period_ms == beam_options.STATE_SAMPLING_MS == 20
    sampler.start()
    sampler.stop()          # the thread ends at its next wake-up
    assert statesampler.StateSampler("stage", CounterFactory(), 200).sampling_period_ms == 200
