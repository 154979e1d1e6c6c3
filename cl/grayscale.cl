/* grayscale: being written. */
