"""Running nanobot as a service: the gateway's lock and live state, the systemd unit, sd_notify."""
