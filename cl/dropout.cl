/* dropout: being written. */
