"""Service-time models: roofline, measured tables, fixed, calibration, memory."""
