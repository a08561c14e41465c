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


def test_an_options_view_is_made_once_and_reads_and_writes_the_shared_values():
    # Beam's view_as made a view (an argparse parse of the flags) at every call, hundreds of times
    # per pipeline built; the view made first is handed out again, and reads what any view wrote.
    from apache_beam.options.pipeline_options import StandardOptions, TypeOptions

    options = beam_options.PipelineOptions(["--runner", "DirectRunner"])
    view = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is view and view.runner == "DirectRunner"
    options.view_as(TypeOptions).pipeline_type_check = False
    view.streaming = True
    assert options.view_as(StandardOptions).streaming is True
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert options.get_all_options()["streaming"] is True
    other = beam_options.PipelineOptions(["--runner", "SparkRunner"])
    assert other.view_as(StandardOptions).runner == "SparkRunner" and other.view_as(StandardOptions) is not view
    assert other.view_as(StandardOptions).streaming is False


def test_a_dofns_state_specs_are_found_once_and_equal_beams():
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms import userstate

    class Counted(beam.DoFn):
        SEEN = userstate.ReadModifyWriteStateSpec("seen", VarIntCoder())

        def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
            seen.write((seen.read() or 0) + 1)
            yield element[0], seen.read()

    find = userstate.get_dofn_specs
    assert find.__wrapped__ is not find
    dofn = Counted()
    specs = find(dofn)
    assert specs == find.__wrapped__(dofn) == ({Counted.SEEN}, set())
    specs[0].clear()                # a caller's sets are its own
    assert find(dofn) == ({Counted.SEEN}, set())
    assert userstate.is_stateful_dofn(dofn) and not userstate.is_stateful_dofn(beam.Map(str).fn)
    with beam.Pipeline() as p:      # a stateful DoFn still runs with its state
        out = p | beam.Create([("k", 1), ("k", 2), ("j", 3)]) | beam.ParDo(dofn)
        assert_that(out, equal_to([("k", 1), ("k", 2), ("j", 1)]))
