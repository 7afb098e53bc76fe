"""Agents: DQN (Mnih et al., 2015), Rainbow (Hessel et al., 2018) and IQN
(Dabney et al., 2018) in TF1 graph mode, as Dopamine's ``dopamine.tf.agents``."""
