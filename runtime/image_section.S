/* The image table, placed in its own section so tools can find it in the
 * file with libelf (section EM_BLOB_SECTION) without loading the library.
 * EMBER_IMAGE_BLOB is the path of the blob the build packed. */
#ifndef EMBER_IMAGE_BLOB
#error "EMBER_IMAGE_BLOB must name the packed image table"
#endif
	.section .ember_images,"a",@progbits
	.balign 64
	.globl em_image_blob_start
	.hidden em_image_blob_start
em_image_blob_start:
	.incbin EMBER_IMAGE_BLOB
	.globl em_image_blob_end
	.hidden em_image_blob_end
em_image_blob_end:
	.section .note.GNU-stack,"",@progbits
