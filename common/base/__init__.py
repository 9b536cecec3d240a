"""The bottom layer every package builds on: argument checks, domain errors, metrics, memory."""
