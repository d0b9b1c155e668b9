"""datalayer package."""
