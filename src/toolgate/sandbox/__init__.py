"""Operating-system sandbox for tools: process isolation and network egress control."""
