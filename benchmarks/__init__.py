"""Benchmarks of dopamine_per; see README.md ("Benchmarks")."""
