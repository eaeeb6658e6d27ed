"""memoryd: keeps AI-agent conversations inside their context budget."""
