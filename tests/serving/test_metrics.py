"""The server's /metrics: Prometheus histograms and counters, written by hand to the exposition
format."""

from __future__ import annotations

from transduce.serving.metrics import Histogram, Metrics


def test_a_histogram_counts_each_value_in_its_bucket_and_writes_them_cumulative():
    histogram = Histogram([0.1, 1.0])
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    assert histogram.counts == [2, 1, 1]  # a value on a bound counts in that bucket
    assert histogram.lines("t", 'path="/x"') == [
        't_bucket{path="/x",le="0.1"} 2', 't_bucket{path="/x",le="1"} 3',
        't_bucket{path="/x",le="+Inf"} 4', 't_sum{path="/x"} 7.65', 't_count{path="/x"} 4']


def test_requests_errors_batches_and_gauges_are_rendered():
    metrics = Metrics({"transduce_queue": ("Sentences waiting.", lambda: 3)})
    metrics.request("/v1/translate", 200, 0.2)
    metrics.request("/v1/translate", 422, 0.01)
    metrics.batch(sentences=4, tokens=40, seconds=2.0, done=3)
    text = metrics.render()
    assert 'transduce_requests_total{path="/v1/translate",status="200"} 1' in text
    assert 'transduce_request_errors_total{path="/v1/translate",status="422"} 1' in text
    assert 'transduce_request_errors_total{path="/v1/translate",status="200"}' not in text
    assert "transduce_sentences_total 3\n" in text  # answered, not searched
    assert "transduce_tokens_per_second 20\n" in text and "transduce_queue 3\n" in text
    assert text.count("# TYPE") == text.count("# HELP")
