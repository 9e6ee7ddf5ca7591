"""Real measurements stored in the database, gathered for calibrating a simulator."""
