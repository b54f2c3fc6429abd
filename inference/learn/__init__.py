"""Learning: the SVI fit of the generative story, calibration, and the nightly train-and-publish job."""
