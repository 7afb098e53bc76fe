"""Helpers the tests share: plain modules, imported alike under pytest and Bazel.

Bazel runs each test file as a program, without tests/conftest.py, so what
several test files need lives here rather than in pytest fixtures.
"""
