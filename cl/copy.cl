/* copy: being written. */
