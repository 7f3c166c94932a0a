"""What every controller runs on: clocks, the controller manager, Events and logs."""
