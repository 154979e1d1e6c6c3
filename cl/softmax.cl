/* softmax: being written. */
