"""The REST API: published configs for services, health for orchestrators."""
