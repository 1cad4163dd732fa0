"""Usage metering: the aggregator's stream records, snapshot windows, settings and redrive."""
