"""The benchmark report: addrmsnorm against its peers, in GB/s, as a share of a roofline measured
in the same run (../shared/BENCHMARKING.md). ``python -m addrmsnorm.bench --help``."""
