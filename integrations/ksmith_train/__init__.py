"""Training the local improver: trajectories to step-level data, SFT and GRPO with trl and peft."""
