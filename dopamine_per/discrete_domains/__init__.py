"""Environments, networks, the experiment runner and the trainer entry point,
as Dopamine's ``dopamine.discrete_domains``."""
