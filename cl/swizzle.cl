/* swizzle: being written. */
