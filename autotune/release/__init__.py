"""What a campaign hands over: the published config, the winner's gains and the report."""
