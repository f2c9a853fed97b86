"""Landing: waiting raw batches, their staging and attempt counts, and the quarantine beside them."""
