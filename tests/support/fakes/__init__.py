"""Fakes that stand in for real peers in tests: real servers on loopback, scripted per test."""
