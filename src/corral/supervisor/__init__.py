"""corral's process supervisor: manifest, policy decisions, logs."""
