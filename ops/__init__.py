"""Operating Sluice locally: the Airflow environment, its services, and the REST client."""
