"""Code the benchmarks and the slow tests share: data sets (TPC-H through tpchgen-cli, synthetic
Crimes and IMP tables, random deltas) and the sketch advisor's accuracy evaluation. Not product
code: nothing under streaming_app/, connectors/, operators/ or state/ imports it."""
