"""The benchmark report: addrmsnorm against its peers, in GB/s, as a share of a roofline measured
in the same run (docs/report.md says how). ``python -m addrmsnorm.bench --help``."""
