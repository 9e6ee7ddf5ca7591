"""What a campaign hands over: the published config, the winner's gains, the result (the one view
of it the CLI renders) and the report."""
